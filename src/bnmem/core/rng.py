"""One registry of RNG salts: every seeded generator is default_rng([seed, SALT[name], ...]),
so two uses of one seed never share a stream by accident."""
SALT = {
    "prepare": 0x9E9A,          # pool / test split and corruption (bnmem.data.corrupt via prepare)
    "batch_order": 0xBA7C,      # training batch order (bnmem.train.loop)
    "keep": 0x4EE9,             # shadow keep masks (bnmem.train.shadow.keep_matrix)
    "shadow_model": 0x5AD0,     # shadow init / batch-order seeds (bnmem.train.shadow.model_seeds)
    "rmia_population": 0x5A11,  # RMIA population samples per target (bnmem.attack.rmia)
    "bootstrap": 0xB007,        # sample-only bootstrap (attack stage)
    "report_bootstrap": 0x5E9,  # sample-only bootstrap of target-model figures (report)
    "model_bootstrap": 0xB0B5,  # draws over shadow pairs and samples (bnmem.attack.resample)
    "null": 0x0DD5,             # fake keep masks of the real null (bnmem.attack.stage.real_null)
    "audit_population": 0xA0D1,  # RMIA population of the exposure / own-model attack
    "dp_sampling": 0xD95A,      # DP-SGD Poisson sampling (bnmem.train.dp)
    "dp_noise": 0xD90E,         # DP-SGD Gaussian noise (bnmem.train.dp)
}
