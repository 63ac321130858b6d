"""Where and in which number format the model computes: device and precision choice (`device`),
inference precisions (int8 on the CPU, fp16/bf16 on CUDA: `precision`) and what `--precision auto` times
(`timing`).
"""
