"""Running a study: the runner and the Study contract it calls, the schedules,
the fork servers and launches of worker processes, the estimate of a run.
Knows no study by name: the studies stand on this layer, not under it."""
