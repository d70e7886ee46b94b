#!/usr/bin/env bash
# Outputs byte-identical before and after a change: every writing tool × every layout in testdata
# (the corpus below), run with the binaries of two revisions; the sha256 of every file each run
# writes, compared. For refactors and speed work that must not change a byte (issues 44, 45).
#
# Usage:
#   bash scripts/bytecheck.sh [BASE_REV]       # BASE_REV (default: HEAD) against the work tree
#   bash scripts/bytecheck.sh --run BIN_DIR OUT_DIR   # the corpus alone, sums in OUT_DIR/sums.txt
# BASE_REV is built (release) in a temp worktree with its own target folder; the work tree with
# `cargo build --release`. Exit 0 when every output is identical, 1 otherwise (the differing
# files listed). Needs nothing but cargo (fixtures are committed).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

corpus() {
  local bin=$1 out=$2 td=$root/testdata t=$root/testdata/tokenizers
  mkdir -p "$out"
  local g=(--allow-global argparse.Namespace)
  run() { # NAME TOOL ARGS… (the output goes to $out/NAME)
    local name=$1 tool=$2
    shift 2
    "$bin/$tool" "$@" >"$out/$name.stdout" 2>"$out/$name.stderr" || echo "exit $?" >>"$out/$name.stderr"
    rm -f "$out/$name.stdout"
  }
  plan() { # NAME TOOL ARGS…: the dry run's Plan (--dry-run --json) kept as $out/NAME.json
    local name=$1 tool=$2
    shift 2
    "$bin/$tool" "$@" --dry-run --json >"$out/$name.json" 2>"$out/$name.stderr" || echo "exit $?" >>"$out/$name.stderr"
  }
  local dry=/nonexistent-bytecheck-output
  # merge-tokenizers: every family, a token list, a trained addition.
  run m_bpe merge-tokenizers --base "$t/chatterbox_base.json" --add "$t/amharic_addition.json" --output "$out/m_bpe.json"
  run m_sp merge-tokenizers --base "$t/sp_english.model" --add "$t/sp_amharic.model" --output "$out/m_sp.model"
  run m_wp merge-tokenizers --base "$t/wordpiece.json" --add "$t/amharic_wordpiece.json" --output "$out/m_wp.json"
  run m_bl merge-tokenizers --base "$td/gpt2/tokenizer.json" --add "$t/gpt2_addition.txt" --output "$out/m_bl.json"
  run m_train merge-tokenizers --base "$td/gpt2/tokenizer.json" --train "$t/amharic.txt" --train-size 200 --output "$out/m_train.json"
  run m_spbpe merge-tokenizers --base "$t/sp_bpe_english.model" --train "$t/amharic.txt" --train-size 100 --output "$out/m_spbpe.model"
  # extend-embeddings: files, folders, sharded sets, torch, every init.
  run e_t3 extend-embeddings "$td/chatterbox_t3/t3_f32.safetensors" --output "$out/e_t3.safetensors" --tokenizer "$out/m_bpe.json"
  run e_t3_hewitt extend-embeddings "$td/chatterbox_t3/t3_bf16.safetensors" --output "$out/e_t3_hewitt.safetensors" --new-rows 2600 --init hewitt --seed 1
  run e_t3_normal extend-embeddings "$td/chatterbox_t3/t3_f32.safetensors" --output "$out/e_t3_normal.safetensors" --new-rows 2600 --init normal --seed 2 --pad-to-multiple-of 64
  run e_t3_sub extend-embeddings "$td/chatterbox_t3/t3_bf16.safetensors" --output "$out/e_t3_sub.safetensors" --tokenizer "$out/m_bpe.json" --base-tokenizer "$t/chatterbox_base.json" --init subword-mean
  run e_gpt2 extend-embeddings "$td/gpt2" --output "$out/e_gpt2" --tokenizer "$out/m_bl.json" --init subword-mean
  run e_sharded extend-embeddings "$td/gpt2_sharded" --output "$out/e_sharded" --new-rows 1100
  run e_bin_sharded extend-embeddings "$td/gpt2_bin_sharded" --output "$out/e_bin_sharded" --new-rows 1100 --init zeros
  run e_torch extend-embeddings "$td/torch/state_dict.pt" --output "$out/e_torch.pt" --new-rows 120
  run e_train extend-embeddings "$td/torch/train_ckpt.pt" --output "$out/e_train.pt" --new-rows 120 "${g[@]}"
  run e_sp extend-embeddings "$td/sp_only/llama" --output "$out/e_sp" --new-rows 520 --init hewitt --seed 3
  run e_codebooks extend-embeddings "$td/audio/codebooks.safetensors" --output "$out/e_codebooks.safetensors" --segments 8 --new-rows 8216 --tensor audio_codebook_embeddings.weight --tensor audio_decoder_proj.audio_lm_head.weight
  # sanitize-checkpoint: torch files, Trainer folders, DCP, ZeRO.
  run s_train sanitize-checkpoint "$td/torch/train_ckpt.pt" --output "$out/s_train.pt" --vocab-rows 120 "${g[@]}"
  run s_24001 sanitize-checkpoint "$td/sanitize/adamw_24001.pt" --output "$out/s_24001.pt" --vocab-rows 24000 --allow-shrink "${g[@]}"
  run s_seed001 sanitize-checkpoint "$td/sanitize/seed001.pt" --output "$out/s_seed001.pt" --vocab-rows 24000 "${g[@]}"
  run s_sgd sanitize-checkpoint "$td/sanitize/sgd_2454.pt" --output "$out/s_sgd.pt" --vocab-rows 2535 "${g[@]}"
  run s_drop sanitize-checkpoint "$td/resume/opt_adamw.pt" --output "$out/s_drop.pt" --vocab-rows 40 --optimizer drop
  run s_lightning sanitize-checkpoint "$td/resume/lightning.ckpt" --output "$out/s_lightning.ckpt" --vocab-rows 40 "${g[@]}"
  run s_trainer sanitize-checkpoint "$td/trainer/checkpoint-2" --output "$out/s_trainer" --vocab-rows 1064
  run s_untied sanitize-checkpoint "$td/trainer_untied/checkpoint-2" --output "$out/s_untied" --vocab-rows 1064 --init hewitt --seed 4
  run s_dcp sanitize-checkpoint "$td/dcp/fsdp2" --output "$out/s_dcp" --vocab-rows 1063
  run s_dcp_single sanitize-checkpoint "$td/dcp/single" --output "$out/s_dcp_single" --vocab-rows 1001 --init hewitt --seed 5
  run s_zero1 sanitize-checkpoint "$td/zero/zero1" --output "$out/s_zero1" --vocab-rows 1063
  run s_zero2 sanitize-checkpoint "$td/zero/zero2_bf16" --output "$out/s_zero2" --vocab-rows 1063
  run s_zero3 sanitize-checkpoint "$td/zero/zero3" --output "$out/s_zero3" --vocab-rows 1063
  run s_megatron sanitize-checkpoint "$td/megatron/tp2" --output "$out/s_megatron" --vocab-rows 150
  run s_megatron_drop sanitize-checkpoint "$td/megatron/tp2" --output "$out/s_megatron_drop" --vocab-rows 150 --optimizer drop
  run s_megatron_legacy sanitize-checkpoint "$td/megatron/legacy_tp2" --output "$out/s_megatron_legacy" --vocab-rows 200
  # Plans (paths in them are the arguments: the same in both runs, so no file of $out).
  plan p_train sanitize-checkpoint "$td/torch/train_ckpt.pt" --output "$dry/p_train.pt" --vocab-rows 120 "${g[@]}"
  plan p_24001 sanitize-checkpoint "$td/sanitize/adamw_24001.pt" --output "$dry/p_24001.pt" --vocab-rows 24000 --allow-shrink "${g[@]}"
  plan p_trainer sanitize-checkpoint "$td/trainer/checkpoint-2" --output "$dry/p_trainer" --vocab-rows 1064
  plan p_megatron sanitize-checkpoint "$td/megatron/tp2" --output "$dry/p_megatron" --vocab-rows 150
  plan p_megatron_legacy sanitize-checkpoint "$td/megatron/legacy_tp2" --output "$dry/p_megatron_legacy" --vocab-rows 200
  # vocab-blocks, check-vocab --fix.
  run b_split vocab-blocks "$td/chatterbox_t3/t3_f32.safetensors" --output "$out/b_split.safetensors" --split text_emb.weight --at 2000
  run c_seed000 check-vocab "$td/check_vocab/seed000" --fix --output "$out/c_seed000"
  run c_seed002 check-vocab "$td/check_vocab/seed002" --fix --output "$out/c_seed002"
  # GGUF grown and trimmed, trim-vocab and transplant-tokenizer on folders, vocab-blocks in torch
  # and back (the paths issue 44's last step moved).
  run g_grow extend-embeddings "$td/gguf/llama_gpt2_untied_q8.gguf" --output "$out/g_grow.gguf" --tokenizer "$out/m_bl.json"
  run g_grow_tok extend-embeddings "$td/gguf/llama_gpt2_tied.gguf" --output "$out/g_grow_tok.gguf" --tokenizer "$out/m_bl.json"
  run g_trim trim-vocab "$td/gguf/llama_gpt2_untied_q8.gguf" --output "$out/g_trim.gguf" --tokenizer "$td/gpt2/tokenizer.json" --keep-corpus "$t/english.txt" --allow-shrink
  run t_trainer trim-vocab "$td/trainer_untied/checkpoint-2" --output "$out/t_trainer" --keep-corpus "$t/english.txt" --allow-shrink
  run t_sharded trim-vocab "$td/gpt2_sharded" --output "$out/t_sharded" --tokenizer "$td/gpt2/tokenizer.json" --keep-corpus "$t/english.txt" --allow-shrink
  run x_gpt2 transplant-tokenizer "$td/gpt2" --output "$out/x_gpt2" --tokenizer "$t/bytelevel_bpe.json" --allow-shrink
  run x_sharded transplant-tokenizer "$td/gpt2_sharded" --output "$out/x_sharded" --tokenizer "$t/bytelevel_bpe.json" --base-tokenizer "$td/gpt2/tokenizer.json" --allow-shrink
  run b_join vocab-blocks "$out/b_split.safetensors" --output "$out/b_join.safetensors" --join text_emb.weight
  run b_split_pt vocab-blocks "$td/torch/state_dict.pt" --output "$out/b_split_pt.pt" --split text_emb.weight --at 60
  run b_join_pt vocab-blocks "$out/b_split_pt.pt" --output "$out/b_join_pt.pt" --join text_emb.weight
  plan p_g_grow extend-embeddings "$td/gguf/llama_gpt2_tied.gguf" --output "$dry/p_g_grow.gguf" --tokenizer "$out/m_bl.json"
  plan p_g_trim trim-vocab "$td/gguf/llama_gpt2_untied_q8.gguf" --output "$dry/p_g_trim.gguf" --tokenizer "$td/gpt2/tokenizer.json" --keep-corpus "$t/english.txt" --allow-shrink
  plan p_e_gpt2 extend-embeddings "$td/gpt2" --output "$dry/p_e_gpt2" --new-rows 1100 --init hewitt --seed 6
  plan p_b_split vocab-blocks "$td/torch/state_dict.pt" --output "$dry/p_b_split.pt" --split text_emb.weight --at 60
  # Every file written, by path under OUT, with its sha256 (the reports are not compared: they
  # name paths and times).
  (cd "$out" && find . -type f ! -name '*.stderr' ! -name sums.txt -print0 | sort -z | xargs -0 sha256sum) >"$out/sums.txt"
  echo "$(wc -l <"$out/sums.txt") files written by the corpus in $out"
}

if [ "${1:-}" = "--run" ]; then
  corpus "$2" "$3"
  exit 0
fi

base=${1:-HEAD}
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/base" "$base"
echo "== building $base (release, in $work/base)"
(cd "$work/base" && cargo build --release --locked --quiet --bins)
echo "== building the work tree (release)"
cargo build --release --locked --quiet --bins
corpus "$work/base/target/release" "$work/out-base"
corpus "$root/target/release" "$work/out-tree"
if diff <(cut -c67- "$work/out-base/sums.txt") <(cut -c67- "$work/out-tree/sums.txt") >/dev/null &&
  diff "$work/out-base/sums.txt" "$work/out-tree/sums.txt"; then
  echo "bytecheck: all $(wc -l <"$work/out-tree/sums.txt") outputs byte-identical ($base vs the work tree)"
else
  echo "bytecheck: outputs differ ($base vs the work tree):"
  diff "$work/out-base/sums.txt" "$work/out-tree/sums.txt" || true
  for f in "$work"/out-tree/*.stderr; do
    n=$(basename "$f")
    cmp -s "$f" "$work/out-base/$n" || { echo "--- $n"; diff "$work/out-base/$n" "$f" | head -5; }
  done
  exit 1
fi
