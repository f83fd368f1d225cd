/*
 * flow_options.h
 *		The options of flows, sources and sinks: parsed, checked, with their
 *		defaults applied (flow_options.c).
 */
#ifndef SDP_FLOW_OPTIONS_H
#define SDP_FLOW_OPTIONS_H

#include "decl/flow.h"

extern void sdp_parse_flow_options(Jsonb *options, SdpFlowOptions *opts);
extern uint32 sdp_operator_options_hash(const Jsonb *options);
extern void sdp_parse_source_options(Jsonb *options, SdpSourceDef *source);
extern bool sdp_source_format_option(const char *key);
extern void sdp_parse_sink_options(Jsonb *options, SdpSinkDef *sink);
extern int	sdp_interval_option_ms(const char *option, const char *text);
extern int64 sdp_interval_option_us(const char *option, const char *text);
extern const char *sdp_write_mode_name(SdpWriteMode mode);
extern void sdp_check_workers(int workers);
extern void sdp_check_workers_quota(int workers);
extern void sdp_check_share_workers(int workers, int nshare);
extern int	sdp_enter_search_path(const char *search_path);
extern bool sdp_worker_owns_partition(const SdpFlowOptions *opts, int32 partition,
									 int worker_no, int nworkers);

#endif							/* SDP_FLOW_OPTIONS_H */
