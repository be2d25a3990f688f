"""The self-distillation loop: collect -> judge -> filter -> SFT -> evaluate -> report."""
