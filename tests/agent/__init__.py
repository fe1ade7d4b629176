"""The GPU node agent, with a fake NVML: no GPU, driver or cluster needed."""
