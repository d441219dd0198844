"""What a run is asked to do: the params' schema language and the job a
parent hands a worker. Stands on ``core`` and ``frameworks``."""
