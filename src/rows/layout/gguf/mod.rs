//! The writing jobs' planning and writing for a GGUF file (llama.cpp): extend-embeddings'
//! ([`extend`]: new tokens appended to the header's tokenizer arrays, tables grown in their own
//! ggml type) and trim-vocab's ([`trim`]: the file's arrays, id keys and tables gathered by a
//! pruned tokenizer's map).

pub mod extend;
pub mod trim;
