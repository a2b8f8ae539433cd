"""The background audit (SPEC §8.3, §8.4): what is wrong with the stored policies now, kept up
to date as the cluster changes, and the PolicyReports that say it. Above admission: it judges
with admission's own rules."""
