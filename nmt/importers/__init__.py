"""Models trained elsewhere, imported as self-contained nmt checkpoints: one module per kind of model.

`marian`: Hugging Face Marian folders (the OPUS-MT models of Helsinki-NLP). An importer reads the folder
with plain libraries (json, torch, safetensors, SentencePiece through nmt.text.spm), never with the library
that wrote it, and returns an `nmt.model.checkpoint.Checkpoint`: the model, its tokenizer, its languages and
its search defaults.
"""
