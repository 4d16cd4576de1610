"""A sweep folder's data model, read by the sweep engine and the analysis alike (below both, so neither
imports the other): its file names (`layout`), the ledger (`ledger`), values as the ledger spells them
(`values`) and the runs' TensorBoard scalars (`events`). No torch, no Lightning."""
