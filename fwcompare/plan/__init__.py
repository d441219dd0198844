"""What a run is asked to do: the params' schema language, the plan of a
run (its cells and rounds) and the job a parent hands a worker. Stands on
``core`` and ``frameworks``."""
