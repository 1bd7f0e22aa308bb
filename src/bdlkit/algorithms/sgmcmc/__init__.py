"""Stochastic-gradient MCMC: SGLD, pSGLD, SGHMC, cyclical SGHMC/SGLD and L2E."""
