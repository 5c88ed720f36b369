"""What a release is gated on: signed attestations (in-toto statements in DSSE envelopes), the
checks each level must contain, and the gate that verifies before it trusts. Never imports torch.
"""
