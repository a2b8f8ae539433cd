"""Admission entry points: the AdmissionReview wire format, `/validate` and `/mutate` as pure
functions from a request to a verdict or a patch."""
