/*
 * traceparent.c - runs the shim's TRACEPARENT parser (spanctx.c) on each
 * argument: "ok <trace id> <span id> <flags>" in hex, or "invalid <why>".
 * Linked with the shim's sources, not preloaded: nothing is intercepted.
 */
#include <stdio.h>

#include "gp.h"

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		uint8_t tr[16], sp[8], fl;
		const char *why = gp_traceparent_parse(argv[i], tr, sp, &fl);
		if (why != NULL) {
			printf("invalid %s\n", why);
			continue;
		}
		printf("ok ");
		for (int j = 0; j < 16; j++)
			printf("%02x", tr[j]);
		printf(" ");
		for (int j = 0; j < 8; j++)
			printf("%02x", sp[j]);
		printf(" %02x\n", fl);
	}
	return 0;
}
