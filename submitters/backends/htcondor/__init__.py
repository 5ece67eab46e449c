"""The ``htcondor`` backend: the batch calls (``backend``), the pure text handling of the condor commands
(``parse``) and the OIDC token a CE is presented (``tokens``)."""
