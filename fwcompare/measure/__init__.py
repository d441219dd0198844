"""One cell measured inside a worker: the gate (build and check a model), the
cell's steps, the shared workloads, the hardware's peak and the numerical
error against a reference. Writes through ``results``; starts no process."""
