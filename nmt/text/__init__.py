"""Text into subwords and back: the `Tokenizer` protocol and its kinds (youtokentome's BPE in `bpe`,
SentencePiece in `spm`), seeded subword sampling (`segment`), and the text a subword model learns from
(`corpus`).
"""
