"""The base layer every other package stands on: errors, files (atomic writes, compressed text, locks), the rule
that an output is never an input nor a user's file (`outputs`), progress events, the user's cache, the special
symbols and what a model was trained on. It imports nothing of nmt.
"""
