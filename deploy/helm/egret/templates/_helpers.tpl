{{/* egret.image is the image every Egret container runs. */}}
{{- define "egret.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* egret.labels are the labels of every object (as kustomize's part-of, plus Helm's). */}}
{{- define "egret.labels" -}}
app.kubernetes.io/part-of: egret
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* egret.podSecurityLabels are the release namespace's PodSecurity labels, as
deploy/namespace.yaml's: the agents (host network, NET_ADMIN, hostPath) need
the privileged level. With createNamespace=false, label the namespace with them
(docs/operations.md, "Restricted clusters"). */}}
{{- define "egret.podSecurityLabels" -}}
pod-security.kubernetes.io/enforce: privileged
pod-security.kubernetes.io/audit: privileged
pod-security.kubernetes.io/warn: privileged
{{- end }}

{{/* egret.logArgs are the logging flags every Egret process takes. */}}
{{- define "egret.logArgs" -}}
- --log-format={{ .Values.log.format }}
{{- with .Values.log.level }}
- --log-level={{ . }}
{{- end }}
{{- end }}

{{/* egret.scheduling is the pod placement every role sets from its values: dict "root" $ "role" .Values.<role>. */}}
{{- define "egret.scheduling" -}}
{{- with .role.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .role.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .role.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* egret.gatewayConfig is gateway.yaml of the egret-gateway ConfigMap. The
gateway gets the tunnel's VNI and port too, so both ends agree. */}}
{{- define "egret.gatewayConfig" -}}
interfaces: {{ required "interfaces.gateway: name the interfaces the gateway serves" .Values.interfaces.gateway | toJson }}
mode: {{ .Values.gateway.mode }}
vni: {{ .Values.networks.vni }}
port: {{ .Values.networks.port }}
logFormat: {{ .Values.log.format }}
conntrackMax: {{ .Values.gateway.conntrackMax | int64 }}
podFlowLimit: {{ .Values.gateway.podFlowLimit | int64 }}
egressIPFlowLimit: {{ .Values.gateway.egressIPFlowLimit | int64 }}
deniedDestinations: {{ .Values.gateway.deniedDestinations | default list | toJson }}
allowedDestinations: {{ .Values.gateway.allowedDestinations | default list | toJson }}
{{- end }}

{{/* egret.steerConfig is steer.yaml of the egret-steer ConfigMap. */}}
{{- define "egret.steerConfig" -}}
underlay: {{ required "interfaces.underlay: name the interface the tunnel runs over" .Values.interfaces.underlay }}
vni: {{ .Values.networks.vni }}
port: {{ .Values.networks.port }}
clusterCIDRs: {{ required "networks.clusterCIDRs: list the cluster's pod networks" .Values.networks.clusterCIDRs | toJson }}
serviceCIDRs: {{ required "networks.serviceCIDRs: list the cluster's service networks" .Values.networks.serviceCIDRs | toJson }}
nodeCIDRs: {{ .Values.networks.nodeCIDRs | default list | toJson }}
logFormat: {{ .Values.log.format }}
{{- if .Values.trustPodIPs }}
trustPodIPs: true
{{- end }}
{{- if eq .Values.steer.noEgressIP "node" }}
noEgressIP: node
{{- end }}
{{- if .Values.steer.allowCiliumHostRouting }}
allowCiliumHostRouting: true
{{- end }}
{{- end }}

{{/* egret.nodeIdentity is "true" when each gateway node authenticates by
its own certificate, issued by the controller (nodeIdentity: csr); it
replaces the file-based probe TLS and the flow sync's shared key. */}}
{{- define "egret.nodeIdentity" -}}
{{- $m := .Values.nodeIdentity | default "" }}
{{- if eq $m "csr" }}
{{- if include "egret.healthTLS" . }}
{{- fail "nodeIdentity=csr and healthTLS exclude each other: the nodes' own certificates authenticate the probe; empty one of them" }}
{{- end }}true
{{- else if $m }}
{{- fail (printf "nodeIdentity %q: use csr, or \"\" for the shared flow sync key and healthTLS" $m) }}
{{- end }}
{{- end }}

{{/* egret.healthTLS is "true" when the reachability probe runs over mutual
TLS; one Secret without the other fails the render, because a controller and
gateways that disagree would move every egress IP. */}}
{{- define "egret.healthTLS" -}}
{{- $t := .Values.healthTLS | default dict }}
{{- if and $t.gatewaySecret $t.controllerSecret }}true
{{- else if or $t.gatewaySecret $t.controllerSecret }}
{{- fail "healthTLS: set both gatewaySecret and controllerSecret, or neither (a controller and gateways that disagree on TLS find each other unreachable)" }}
{{- end }}
{{- end }}
