//! SentencePiece model protos: parse, append a piece, parse the result, segment a text.
#![no_main]
use ckpt_surgery::tokenizer::sentencepiece::{append, parse, viterbi, PieceType};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = parse(data.to_vec()) {
        let grown = append(&m, &[("▁ሰላም".to_string(), -10.0, PieceType::Normal)]);
        let again = parse(grown).expect("an appended model must parse");
        let pieces: Vec<_> = again
            .pieces
            .iter()
            .map(|p| (p.piece.clone(), p.score, p.kind))
            .collect();
        let _ = viterbi(&pieces, "▁ሰላም▁hello");
    }
});
