{{- /*
Names. Namespaced objects have fixed names (hub, proxy, proxy-public, proxy-api: one release
per namespace, as in Zero to JupyterHub); cluster-wide ones carry the release name.
*/}}
{{- define "pc.hub" -}}hub{{- end }}
{{- define "pc.proxy" -}}proxy{{- end }}
{{- define "pc.proxyPublic" -}}proxy-public{{- end }}
{{- define "pc.proxyApi" -}}proxy-api{{- end }}
{{- define "pc.hubDb" -}}hub-db{{- end }}
{{- define "pc.settingsConfigMap" -}}hub-settings{{- end }}
{{- define "pc.hubClusterRole" -}}{{ .Release.Name }}-hub{{- end }}
{{- define "pc.notebookClusterRole" -}}{{ .Release.Name }}-notebook{{- end }}
{{- /* The quota service's ConfigMap (paddle_ext.constants.QUOTA_CONFIGMAP), written by the hub. */}}
{{- define "pc.quotaConfigMap" -}}paddlecloud-quotas{{- end }}
{{- /* The admission policy that keeps users' Services inside (paddle_ext.tenancy.EXPOSURE_POLICY_NAME). */}}
{{- define "pc.exposurePolicy" -}}paddlecloud-services-stay-inside{{- end }}

{{- /*
What pods in user namespaces may carry (paddle_ext.hub.settings.pod_rules, as the variables of
paddle_ext.policies.user_pod_policies: CEL literals, which JSON is; tests/helm checks they agree).
Tolerations as key|operator|value|effect, after the two the API server adds to every pod.
*/}}
{{- define "pc.policy.gpu" -}}{{ .Values.settings.gpu_resource | default "nvidia.com/gpu" | toJson }}{{- end }}
{{- define "pc.policy.tolerations" -}}
{{- $keys := list "node.kubernetes.io/not-ready|Exists||NoExecute" "node.kubernetes.io/unreachable|Exists||NoExecute" }}
{{- range $t := concat (.Values.settings.gpu_tolerations | default list) (.Values.settings.allowed_tolerations | default list) }}
{{- $keys = append $keys (printf "%s|%s|%s|%s" ($t.key | default "") ($t.operator | default "Equal") (toString ($t.value | default "")) ($t.effect | default "")) }}
{{- end }}
{{- toJson $keys }}
{{- end }}
{{- define "pc.policy.priorityClasses" -}}{{ .Values.settings.allowed_priority_classes | default list | toJson }}{{- end }}
{{- define "pc.policy.datasetClaims" -}}
{{- $claims := list }}
{{- range $d := (.Values.settings.datasets | default list) }}
{{- if and $d.volume (hasKey $d.volume "persistentVolumeClaim") }}
{{- $claims = append $claims $d.volume.persistentVolumeClaim.claimName }}
{{- end }}
{{- end }}
{{- $claims | uniq | sortAlpha | toJson }}
{{- end }}

{{- /* paddle_ext.constants.HUB_API_PORT (tests/unit checks they are the same). */}}
{{- define "pc.hubApiPort" -}}8081{{- end }}
{{- define "pc.quotaPort" -}}10101{{- end }}
{{- define "pc.proxyApiPort" -}}8001{{- end }}
{{- define "pc.proxyPort" -}}8000{{- end }}

{{- /* Where pods in any namespace reach the hub's Service. */}}
{{- define "pc.hubHost" -}}{{ include "pc.hub" . }}.{{ .Release.Namespace }}.svc{{- end }}

{{- /* Labels */}}
{{- define "pc.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "pc.labels" -}}
{{ include "pc.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ .root.Chart.Name }}-{{ .root.Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "pc.image" -}}{{ .repository }}:{{ .tag }}{{- end }}

{{- /*
The Secret's generated values, made once and kept: read back from the Secret in the cluster
(lookup) when it is there, else new. Computed once per render (cached in .Values), so the
Secret and the pods' checksum annotations agree even on the first install.
*/}}
{{- define "pc.generated" -}}
{{- if not (hasKey .Values "__pcGenerated") }}
{{- $data := (lookup "v1" "Secret" .Release.Namespace (include "pc.hub" .)).data | default dict }}
{{- $token := get $data "proxy.token" | b64dec }}
{{- if not $token }}{{ $token = randAlphaNum 64 }}{{ end }}
{{- $cookie := get $data "hub.cookie-secret" | b64dec }}
{{- if not $cookie }}
{{- range $i := until 64 }}{{ $cookie = print $cookie (mod (randNumeric 4 | atoi) 16 | printf "%x") }}{{ end }}
{{- end }}
{{- $_ := set .Values "__pcGenerated" (dict "proxyToken" $token "cookieSecret" $cookie) }}
{{- end }}
{{- toJson (get .Values "__pcGenerated") }}
{{- end }}

{{- /*
The traitlets passthrough the hub loads last: hub.config, plus what the chart decides
(the chart installs the admission policies itself, so the hub need not).
*/}}
{{- define "pc.hubConfig" -}}
{{- $config := deepCopy .Values.hub.config }}
{{- $spawner := get $config "PaddleCloudSpawner" | default dict }}
{{- $_ := set $spawner "service_exposure_policy" false }}
{{- $_ := set $spawner "user_pod_policy" false }}
{{- $_ := set $config "PaddleCloudSpawner" $spawner }}
{{- toYaml $config }}
{{- end }}

{{- /* Where users' pods reach the API server: values, else the cluster's (the `kubernetes` Service's
endpoints and ClusterIPs), else nowhere: where the address cannot be read (helm template, a client
dry run, a cluster that publishes no endpoints) users' pods get no API-server egress rather than
ports 443/6443 to any address, and NOTES.txt says to set networkPolicy.apiServer. */}}
{{- define "pc.apiServer" -}}
{{- $entries := list }}
{{- if .Values.networkPolicy.apiServer }}
{{- $entries = .Values.networkPolicy.apiServer }}
{{- else }}
{{- $service := lookup "v1" "Service" "default" "kubernetes" }}
{{- $slices := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "" }}
{{- range $slice := ($slices.items | default list) }}
{{- if eq (index ($slice.metadata.labels | default dict) "kubernetes.io/service-name" | default "") "kubernetes" }}
{{- range $port := ($slice.ports | default list) }}
{{- range $endpoint := ($slice.endpoints | default list) }}
{{- range $address := $endpoint.addresses }}
{{- $cidr := ternary (printf "%s/128" $address) (printf "%s/32" $address) (contains ":" $address) }}
{{- $entries = append $entries (dict "cidr" $cidr "port" $port.port) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $entries $service }}
{{- range $ip := ($service.spec.clusterIPs | default (list $service.spec.clusterIP)) }}
{{- $cidr := ternary (printf "%s/128" $ip) (printf "%s/32" $ip) (contains ":" $ip) }}
{{- range $port := $service.spec.ports }}
{{- $entries = append $entries (dict "cidr" $cidr "port" $port.port) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $entries }}
{{- end }}

{{- /* The hub's settings file (paddle_ext.hub.settings.HubSettings): settings plus what the chart decides. */}}
{{- define "pc.settings" -}}
{{- $settings := deepCopy .Values.settings }}
{{- $_ := set $settings "hub_namespace" .Release.Namespace }}
{{- $_ := set $settings "hub_connect_url" (printf "http://%s:%s" (include "pc.hubHost" .) (include "pc.hubApiPort" .)) }}
{{- $_ := set $settings "quota_service_host" (include "pc.hubHost" .) }}
{{- $_ := set $settings "quota_service_port" (include "pc.quotaPort" . | atoi) }}
{{- $_ := set $settings "notebook_cluster_role" (include "pc.notebookClusterRole" .) }}
{{- if .Values.networkPolicy.enabled }}
{{- $policy := dict
      "hub_pod_labels" (include "pc.selectorLabels" (dict "root" . "component" "hub") | fromYaml)
      "proxy_pod_labels" (include "pc.selectorLabels" (dict "root" . "component" "proxy") | fromYaml)
      "hub_api_port" (include "pc.hubApiPort" . | atoi)
      "api_server" (include "pc.apiServer" . | fromJsonArray)
      "egress" .Values.networkPolicy.userEgress
      "dns" (.Values.networkPolicy.dns | default list) }}
{{- $_ := set $settings "user_network_policy" $policy }}
{{- end }}
{{- toYaml $settings }}
{{- end }}

{{- /* The pods' and containers' security contexts: Pod Security "restricted", the user and group
of every pod (paddle_ext.manifests' pod_security_context and container_security_context; tests/unit
checks they are the same). */}}
{{- define "pc.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 1000
runAsGroup: 100
fsGroup: 100
seccompProfile:
  type: RuntimeDefault
{{- end }}
{{- define "pc.containerSecurityContext" -}}
allowPrivilegeEscalation: false
capabilities:
  drop: [ALL]
runAsNonRoot: true
seccompProfile:
  type: RuntimeDefault
{{- end }}
