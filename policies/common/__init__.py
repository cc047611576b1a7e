"""Pieces shared by the generative (diffusion, flow) policies: normalizer, encoders, denoiser nets."""
