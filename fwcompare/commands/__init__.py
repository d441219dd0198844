"""The entry points: the command line (``fwcompare``) and the processes the
suite starts (a worker, a fork server). Nothing of fwcompare imports these."""
