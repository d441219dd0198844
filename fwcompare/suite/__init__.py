"""The suite of studies: params files checked, studies run by name, the claims
scorecard, the report site, shards and cluster submissions, the doctor.
Stands on the studies and every layer below them."""
