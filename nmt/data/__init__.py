"""Training data: the binarized, memory-mapped parallel store that `nmt prepare` writes (`dataset`), each
split streamed into it from text (`binarize`, with the duplicate filter's hash set in `dedup`),
token-based batches (`batches`), a fresh subword segmentation per epoch (`regularization`), and the target
tokens that co-occur with each source token, a vocabulary shortlist (`cooccurrence`).
"""
