"""Texts as people write them, around any engine: a line of several sentences, a request of several lines, an HTML
page (`texts`: `Documents`, cut into sentences and put back together), and streams of lines: stdin read as the
lines arrive, a file's translations (`streams`).
"""
