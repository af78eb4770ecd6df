"""What a bundle computes for a prompt: the outcome models' scores (_scorer), their calibration
(_calibration), the familiarity check (_novelty) and the learned acceptance check on answers
(_acceptance). Public names are exported from `serving`."""
