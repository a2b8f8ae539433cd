"""The vocabulary: object names, kinds, policy kinds and their profiles, the policy model,
settings and leaves. Pure values; reads no cluster state."""
