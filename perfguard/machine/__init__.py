"""The machine: the environment fingerprint and NVML telemetry (static GPU facts and a sampler)."""
