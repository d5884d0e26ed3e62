"""The fold verification: every folded tensor computed again from the original, and for which
inputs the match holds."""
