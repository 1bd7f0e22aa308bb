"""Full-batch MCMC references: HMC and NUTS."""
