"""`make bench-e2e`: one GPU trace replayed through queue-controller, Kueue and no queue at
all, each on a freshly started local control plane, measured the same way from outside."""
