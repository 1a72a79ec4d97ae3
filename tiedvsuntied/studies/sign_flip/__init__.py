"""The third edition (issue 40, experiments/sign_flip): where tying's effect changes sign on a
map over the head's share rho. Its reading side: :mod:`.analysis` (the cells, contrasts and the
primary slope), :mod:`.curve` (the fit against ln rho), :mod:`.tokens` (the effect along
training), :mod:`.figures` and :mod:`.tables`."""
