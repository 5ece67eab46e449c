"""The shared kernel: what gateway, submitters and controller all use, below every one of them.

- ``layout``: the job-directory contract between the rendered script and the submitters;
- ``subjects``: NATS subjects, identity roles and their reply inbox prefixes;
- ``names``: the DNS-label and pod-UID rules;
- ``quantities``: Kubernetes resource quantities, exact;
- ``nats_connection``: the one way to build NATS/TLS connection options and connect;
- ``version``: the installed version, which processes announce;
- ``fastwire_runtime``: the wire primitives the generated codecs (``gen/.../fastwire.py``) import.

It imports nothing else of the project (tests/contracts/test_import_contracts.py checks it), so any layer can
depend on it without cycles. Everything but ``nats_connection`` is pure.
"""
