#!/usr/bin/env bash
# Seed each fuzz target's corpus from the committed testdata (small files only; libFuzzer then
# mutates them). Python's standard zipfile pulls the pickles out of the torch zip fixtures.
set -euo pipefail
cd "$(dirname "$0")"
T=../testdata
mk() { rm -rf "corpus/$1"; mkdir -p "corpus/$1"; }
mk safetensors_open
for f in $T/broken/*.safetensors $T/check_vocab/*/model.safetensors $T/broken/sharded_*/s*.safetensors; do
  cp "$f" "corpus/safetensors_open/$(echo "${f#$T/}" | tr / _)"
done
mk sharded_index
for f in $T/*/model.safetensors.index.json $T/broken/*/model.safetensors.index.json $T/gpt2_bin_sharded/pytorch_model.bin.index.json; do
  cp "$f" "corpus/sharded_index/$(echo "${f#$T/}" | tr / _)"
done
mk torch_container
for f in $T/torch/*.pt $T/torch_hostile/*.pt $T/sanitize/ambiguous.pt $T/sanitize/nan_moment.pt; do
  cp "$f" "corpus/torch_container/$(echo "${f#$T/}" | tr / _)"
done
mk pickle_vm
python3 - "$T" <<'PY'
import sys, zipfile, glob, os
T = sys.argv[1]
for f in sorted(glob.glob(f"{T}/torch/*.pt") + glob.glob(f"{T}/torch_hostile/*.pt") + glob.glob(f"{T}/sanitize/*.pt")):
    name = os.path.relpath(f, T).replace("/", "_")
    if zipfile.is_zipfile(f):
        try:
            z = zipfile.ZipFile(f)
            for n in z.namelist():
                if n.endswith("data.pkl"):
                    open(f"corpus/pickle_vm/{name}.pkl", "wb").write(z.read(n))
        except Exception as e:
            print("skip", f, e)
    else:
        # legacy files: a sequence of pickles; the whole file seeds the VM too
        open(f"corpus/pickle_vm/{name}", "wb").write(open(f, "rb").read()[:65536])
PY
mk tokenizer_merge
for f in $T/tokenizers/*.json $T/check_vocab/seed002/tokenizer.json $T/check_vocab/seed003/tokenizer.json; do
  cp "$f" "corpus/tokenizer_merge/$(echo "${f#$T/}" | tr / _)"
done
mk sentencepiece_parse
python3 - "$T" <<'PY'
# The shipped models are ~240 KB; also seed a cut-down model (first 200 pieces + the rest of the
# proto) so mutations reach the trainer/normalizer specs quickly.
import sys
T = sys.argv[1]
for name in ["sp_english.model", "sp_amharic.model"]:
    b = open(f"{T}/tokenizers/{name}", "rb").read()
    open(f"corpus/sentencepiece_parse/{name}", "wb").write(b)
    out, i, kept = bytearray(), 0, 0
    def varint(b, i):
        v = s = 0
        while True:
            c = b[i]; i += 1; v |= (c & 0x7f) << s; s += 7
            if c < 0x80: return v, i
    while i < len(b):
        start = i
        key, i = varint(b, i)
        wt = key & 7
        if wt == 2:
            n, i = varint(b, i); i += n
        elif wt == 0:
            _, i = varint(b, i)
        elif wt == 5: i += 4
        elif wt == 1: i += 8
        if key >> 3 == 1:
            kept += 1
            if kept > 200: continue
        out += b[start:i]
    open(f"corpus/sentencepiece_parse/small_{name}", "wb").write(out)
PY
mk gguf_open
for f in $T/gguf/*.gguf; do
  cp "$f" "corpus/gguf_open/$(basename "$f")"
done
mk gguf_edit
cp corpus/gguf_open/* corpus/gguf_edit/
mk chat_template
printf '%s' "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}" >corpus/chat_template/chatml.jinja
printf '%s' "{{ bos_token }}{% for m in messages %}{%- if m['role'] == 'assistant' -%}{% set role = 'model' %}{% else %}{% set role = m['role'] %}{% endif %}
  {{ '<start_of_turn>' + role + '\n' + m['content'] | trim + '<end_of_turn>\n' }}
{% endfor %}{# generation #}{%- if add_generation_prompt %}<start_of_turn>model
{% endif -%}" >corpus/chat_template/gemma.jinja
printf '%s' "{% raw %}{{ not a tag }}{% endraw %}{{ \"it\\'s \\x41\\u00e9\" ~ x[\"k\"] }}" >corpus/chat_template/escapes.jinja
for d in corpus/*; do echo "$d: $(ls "$d" | wc -l) seeds"; done
