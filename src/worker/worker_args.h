/*
 * worker_args.h
 *		What the launcher hands a flow worker it starts: all it needs to
 *		know of the worker.
 */
#ifndef SDP_WORKER_ARGS_H
#define SDP_WORKER_ARGS_H

#include "postgres.h"

/* Passed in BackgroundWorker.bgw_extra (at most BGW_EXTRALEN bytes). */
typedef struct SdpWorkerArgs
{
	int			slotno;
	Oid			dboid;
	Oid			owner;
	int64		flow_id;
	uint64		generation;		/* the slot's, when the launcher registered the worker */
	int			worker_no;		/* which of the flow's workers, 0 .. nworkers - 1 */
	int			nworkers;		/* partition p is this worker's when p % nworkers = worker_no */
	char		name[NAMEDATALEN];
} SdpWorkerArgs;

StaticAssertDecl(sizeof(SdpWorkerArgs) <= 128, "SdpWorkerArgs must fit in bgw_extra");

/* worker.c: the worker's entry point (bgw_function_name) */
extern PGDLLEXPORT void sdp_flow_worker_main(Datum main_arg);

#endif							/* SDP_WORKER_ARGS_H */
