"""Procedural data every run trains or evaluates on: the motion vocabulary, scenes and clips,
the add-on motions, and the real photographs that ship inside Python packages."""
