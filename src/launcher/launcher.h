/*
 * launcher.h
 *		The launcher: the static background worker that keeps the running
 *		flow workers equal to what sdp.flows asks for (launcher.c).
 */
#ifndef SDP_LAUNCHER_H
#define SDP_LAUNCHER_H

#include "sdp.h"

extern void sdp_register_launcher(void);
extern PGDLLEXPORT void sdp_launcher_main(Datum main_arg);

#endif							/* SDP_LAUNCHER_H */
