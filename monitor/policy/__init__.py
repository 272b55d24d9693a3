"""Where to speculate and how far: a policy learnt from pre-request signals only, judged on
held-out later traffic, written out as engine settings (``specwatch policy``, docs/policy.md)."""
