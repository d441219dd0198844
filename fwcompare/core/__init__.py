"""The ground floor: data and pure functions every other layer stands on.

Specs of a cell, paths, the environment manifest, statistics, the timer, the
memory and host meters, model configs, the input pipelines' data and the
training clock. Nothing here imports another layer of fwcompare.
"""
