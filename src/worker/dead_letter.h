/*
 * dead_letter.h
 *		Messages and rows set aside, and sdp.dead_letters (dead_letter.c).
 */
#ifndef SDP_DEAD_LETTER_H
#define SDP_DEAD_LETTER_H

#include "worker/worker_internal.h"

extern void sdp_dead_letters_prepare(FlowWorker *w);
extern DeadLetter *sdp_dead_letter_add(Batch *b, rd_kafka_message_t *m, const char *stage,
									   const char *error, int sqlstate);
extern bool sdp_set_aside(FlowWorker *w, Batch *b, rd_kafka_message_t *m, const char *row_text,
						  const char *stage, ErrorData *edata, char **fail_message);
extern void sdp_write_dead_letters(FlowWorker *w, Batch *b);
extern char *sdp_row_as_json(TupleDesc desc, HeapTuple row);

#endif							/* SDP_DEAD_LETTER_H */
