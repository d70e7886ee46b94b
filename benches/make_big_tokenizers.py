"""Generate Gemma-sized tokenizers for benches/tokenizers.sh (not committed): a byte-level BPE
tokenizer.json of 262144 ids (256 bytes + 262144 - 256 - 1 merges + one special) and additions
of 1 000 and 20 000 new words; with sentencepiece and protobuf installed, a 262144-piece unigram
.model (the BPE's ASCII tokens, then random words).
Usage: python3 benches/make_big_tokenizers.py OUT_DIR"""
import json, os, random, sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
N = 262144
random.seed(262144)
# GPT-2's byte-to-unicode map: the symbols a byte-level BPE vocabulary is written in.
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
cs = bs[:]
n = 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
alphabet = [chr(c) for c in cs]
vocab = {s: i for i, s in enumerate(alphabet)}
tokens = list(alphabet)
merges = []
letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
# Merges of two existing tokens, biased to short ones, each result new: a deterministic, realistic
# shape (long tokens built from shorter ones).
while len(tokens) < N - 1:
    a = tokens[min(int(random.expovariate(1 / 3000)), len(tokens) - 1)] if random.random() < 0.7 else random.choice(letters)
    b = tokens[min(int(random.expovariate(1 / 3000)), len(tokens) - 1)] if random.random() < 0.7 else random.choice(letters)
    t = a + b
    if t in vocab or len(t) > 24:
        continue
    vocab[t] = len(tokens)
    tokens.append(t)
    merges.append(f"{a} {b}")
tok = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [{"id": N - 1, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True}],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
              "vocab": vocab, "merges": merges},
}
tok["model"]["vocab"]["<|endoftext|>"] = N - 1
with open(os.path.join(out, "big_bpe.json"), "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False)
for k in (1000, 20000):
    words = []
    seen = set()
    while len(words) < k:
        w = "".join(random.choice(letters) for _ in range(random.randint(5, 12)))
        if w not in vocab and w not in seen:
            seen.add(w)
            words.append(w)
    with open(os.path.join(out, f"add_{k}.txt"), "w") as f:
        f.write("\n".join(words) + "\n")
print(f"big_bpe.json: {len(vocab)} ids, {len(merges)} merges")
try:
    import sentencepiece.sentencepiece_model_pb2 as pb
    m = pb.ModelProto()
    m.trainer_spec.model_type = 1
    m.trainer_spec.vocab_size = N
    m.normalizer_spec.name = "identity"
    for p, t in [("<unk>", 2), ("<s>", 3), ("</s>", 3)]:
        x = m.pieces.add(); x.piece = p; x.score = 0.0; x.type = t
    i = 0
    for t in tokens:
        if len(m.pieces) >= N:
            break
        if all(ord(c) < 128 for c in t) and t.isprintable() and " " not in t:
            x = m.pieces.add(); x.piece = "\u2581" + t if i % 3 == 0 else t; x.score = -float(i) / 1000; i += 1
    seen = {p.piece for p in m.pieces}
    while len(m.pieces) < N:
        t = "".join(random.choice(letters) for _ in range(random.randint(2, 9)))
        t = "\u2581" + t if i % 3 == 0 else t
        if t in seen:
            continue
        seen.add(t)
        x = m.pieces.add(); x.piece = t; x.score = -float(i) / 1000; i += 1
    with open(os.path.join(out, "big_sp.model"), "wb") as f:
        f.write(m.SerializeToString())
    print(f"big_sp.model: {len(m.pieces)} pieces")
except ImportError:
    print("sentencepiece not installed: no .model")
