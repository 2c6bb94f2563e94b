/*
 * app_kinds.c - the launch kinds of the test application: a dynamic-
 * parallelism parent, launches with attributes (cooperative, a thread-
 * block cluster) and a cooperative launch, each of a kernel whose name
 * tells the MOCK CUPTI (mock_libcupti.c) how the real one reports it, and
 * a kernel the driver does not time.
 */
#include <string.h>

#include "app.h"

/* Launch attribute ids and the CUlaunchAttribute layout (cuda.h, 12.0+):
 * the id, padding to 8 bytes, a 64-byte value. */
enum { ATTR_COOPERATIVE = 2, ATTR_CLUSTER_DIMENSION = 4 };
struct launch_attr {
	int id;
	char pad[4];
	union {
		char bytes[64];
		int cooperative;
		struct {
			unsigned x, y, z;
		} cluster;
	} value;
};

/* kinds_scenario runs the "kinds" scenario; -1 when scenario is another. */
int kinds_scenario(const char *scenario, int argc, char **argv)
{
	(void)argc, (void)argv;
	if (strcmp(scenario, "kinds") != 0)
		return -1;
	void *(*quiet)(const char *) = mock("mock_quiet_function");
	void *parent = quiet("_Z10cdp_parentv"), *attrs = quiet("_Z11nested_attrv");
	void *coop = quiet("_Z11nested_coopv"), *untimed = quiet("_Z12untimed_kernv");
	CHECK(A.launch(parent, 2, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
	struct launch_attr at[2];
	memset(at, 0, sizeof at);
	at[0].id = ATTR_COOPERATIVE, at[0].value.cooperative = 1;
	launch_config c = {4, 1, 1, 64, 1, 1, 0, (void *)0x42, at, 1};
	CHECK(A.launch_ex(&c, attrs, NULL, NULL));
	at[1].id = ATTR_CLUSTER_DIMENSION, at[1].value.cluster.x = 2, at[1].value.cluster.y = 1, at[1].value.cluster.z = 1;
	c.attrs = &at[1];
	CHECK(A.launch_ex(&c, attrs, NULL, NULL));
	CHECK(A.coop(coop, 2, 1, 1, 64, 1, 1, 0, (void *)0x43, NULL));
	CHECK(A.launch(untimed, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
	printf("app: kinds done\n");
	return 0;
}
