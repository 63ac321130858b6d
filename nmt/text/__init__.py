"""Text into subwords and back: the `Tokenizer` protocol and its kinds (youtokentome's BPE in `bpe`,
SentencePiece in `spm`), seeded subword sampling (`segment`), the text a subword model learns from
(`corpus`), a multilingual model's target-language tags (`tags`); and what surrounds subwords: a line's sentences
(`sentences`), HTML as tokens (`html_tokens`) and the text of HTML and its tags (`markup`), language names and
detection (`languages`).
"""
