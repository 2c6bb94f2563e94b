// target: the user program the tests probe. probed_add is called argv[1]
// times with a = i, b = 1000 + 7i and returns a + b.
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long probed_add(long a, long b)
{
	__asm__ volatile("");
	return a + b;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1;
	long s = 0;
	for (int i = 0; i < n; i++)
		s += probed_add(i, 1000 + 7 * i);
	printf("%ld\n", s);
	return 0;
}
