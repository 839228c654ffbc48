"""The analytical model: closed-form costs of workloads, compute, memory, network and thermal."""
