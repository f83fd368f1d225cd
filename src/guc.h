/*
 * guc.h
 *		The variables of sdp_ext's GUCs (guc.c); main.c defines the GUCs.
 */
#ifndef SDP_GUC_H
#define SDP_GUC_H

extern char *sdp_database;
extern int	sdp_max_flows;
extern int	sdp_launcher_naptime_ms;
extern int	sdp_default_max_batch_rows;
extern int	sdp_default_state_memory_limit_kb;
extern int	sdp_dead_letter_retention_s;
extern int	sdp_dead_letter_prune_interval_s;
extern int	sdp_max_workers_per_role;
extern int	sdp_max_objects_per_role;
extern int	sdp_stall_timeout_s;
extern char *sdp_standby_slots;

extern int	sdp_role_worker_quota(void);

#endif							/* SDP_GUC_H */
