# Copyright (c) 2026, the sbqueue authors
#
# SbqNode: the server most TAP tests start.
package SbqNode;

use strict;
use warnings;

use PostgreSQL::Test::Cluster;

# A started server named $name with sbqueue preloaded and the maintenance
# worker off (the test runs sbq_maintain() itself, when it wants to), and
# the further postgresql.conf lines in $conf.
sub preloaded
{
	my ($name, $conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'sbqueue'\n"
		  . "sbqueue.enable_maintenance_worker = off\n"
		  . ($conf // ''));
	$node->start;
	return $node;
}

1;
