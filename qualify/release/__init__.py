"""Making and gating a release: ``qualify convert`` (the reference conversion a release is checked
against), signed attestations (in-toto statements in DSSE envelopes), the checks each level must
contain, and the gate that verifies before it trusts. The gate and the attestations never import torch.
"""
