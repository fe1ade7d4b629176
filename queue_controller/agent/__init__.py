"""The GPU node agent: one process per GPU node, reading NVML and publishing health on its Node."""
