"""Training: one training process (`trainer`) with its validation (`validation`), its checkpoints and their
exact restore (`resume`), its learning-rate schedule (`schedule`) and log files (`runlog`); the processes
of a job (`distributed`: spawn, torchrun, collectives) and a run's plan and start (`launch`).
"""
