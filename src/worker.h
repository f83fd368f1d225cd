/*
 * worker.h
 *		What the launcher tells a flow worker when it starts it.
 */
#ifndef SDP_WORKER_H
#define SDP_WORKER_H

#include "sdp.h"

/* Passed in BackgroundWorker.bgw_extra (at most BGW_EXTRALEN bytes). */
typedef struct SdpWorkerArgs
{
	int			slotno;
	Oid			dboid;
	Oid			owner;
	int64		flow_id;
	char		name[NAMEDATALEN];
} SdpWorkerArgs;

StaticAssertDecl(sizeof(SdpWorkerArgs) <= 128, "SdpWorkerArgs must fit in bgw_extra");

#endif							/* SDP_WORKER_H */
