"""The submitter's work, executing the core's plans: ``submission`` (Submit, Cancel), ``polling`` (one batched
backend poll for every tracked job), ``recovery`` (after a restart or a replica's death), ``queries`` (the reads).
Each takes the parts it uses by name; the runtime wires them.
"""
