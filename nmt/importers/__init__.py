"""Models trained elsewhere, imported as self-contained nmt checkpoints: one module per kind of model.

`marian`: Hugging Face Marian folders (the OPUS-MT models of Helsinki-NLP). An importer reads the folder
with plain libraries (json, torch, safetensors, SentencePiece through nmt.text.spm), never with the library
that wrote it, and returns an `nmt.model.checkpoint.Checkpoint`: the model, its tokenizer, its languages and
its search defaults. `hf_folder`: what every importer of a Hugging Face folder shares: its files read within
bounds, its configs' values checked for type and range before anything of the size they name is allocated, its
languages (tokenizer_config.json, the folder's name), the search defaults of its generation config, and the
`hf download` line that fetches a model's folder.
"""
