"""Point estimates and their ensembles: MAP and deep ensembles."""
