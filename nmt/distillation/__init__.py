"""A teacher's knowledge in a small, fast student, in one place: `nmt distill` end to end, chunk by chunk and
resumable (`distill`), the n-best closest to the reference (`interpolation`), what a teacher gets wrong, told from
a line and its translation (`teacher_checks`); `nmt shortlist` end to end (`shortlisting`), from the target tokens
that co-occur with each source token in the training data (`cooccurrence`).
"""
