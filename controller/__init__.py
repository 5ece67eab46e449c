"""kueue-nats: turns MasterQueues and pools' resource reports into Kueue ResourceFlavors and ClusterQueues.

Layers (upper may import lower only):

- ``cli``        typer commands ``render`` (offline) and ``run``;
- ``runner``     the loop: MasterQueue watch, ticks, diff against what was applied, status, events;
- ``kube``       the Kubernetes seam (``KubeApi`` protocol, lightkube implementation);
  ``listening``  the NATS seam (shared subscriptions, Describe at start, report store);
  ``offline``    offline rendering for the CLI's ``render``;
- ``reconcile``  pure: (MasterQueue, reports, Kueue version, now) → desired objects;
- ``model``      pure data (quantities are ``interlink_nats.kernel.quantities``).

``reconcile`` and ``model`` do no I/O and read no clock (tests/contracts/test_import_contracts.py checks the I/O part).
"""
