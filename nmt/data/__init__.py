"""Training data: the binarized, memory-mapped parallel store that `nmt prepare` writes (`dataset`), each
split streamed into it from text (`binarize`, with the duplicate filter's hash set in `dedup`),
token-based batches (`batches`) and a fresh subword segmentation per epoch (`regularization`).
"""
